"""What a job is made of, as every layer above sees it: its tasks (``job_model``: ``JobModel``,
``TaskModel``, ``ContainerModel``) and how SSPs become named tasks (``grouper``: Samza's groupers,
task names, virtual tasks and ``task_order``). Pure data and functions over the public API's types:
computing a model for a job (its history, its processors) is the coordinator's."""
