# syntax=docker/dockerfile:1
# samzamp's image: `docker build -t samzamp .`, then `docker run samzamp run /etc/samzamp/job.toml`
# with the job's config mounted there and its code in /srv/job (or FROM samzamp, COPY your package).
#
#   --build-arg EXTRAS=prometheus,zookeeper   the extras installed (default: the Prometheus/healthz
#                                             endpoint and standalone mode); "" for the engine only
#   --build-arg PYTHON_VERSION=3.12           the CPython of both stages (3.11 or newer)
ARG PYTHON_VERSION=3.12

# Build: a compiler, samzamp's wheel with its C extensions (samzamp._ring, _keyhash, _checksum, _fetchpack),
# and a wheel of every runtime dependency, so the runtime stage needs neither a compiler nor the
# source tree.
FROM python:${PYTHON_VERSION}-slim-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
ARG EXTRAS=prometheus,zookeeper
WORKDIR /src
COPY setup.py pyproject.toml README.md LICENSE ./
COPY native/ native/
COPY samzamp/ samzamp/
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && python -m pip wheel --no-cache-dir --wheel-dir /wheels "$(ls /wheels/samzamp-*.whl)${EXTRAS:+[$EXTRAS]}"

# Runtime: CPython, the wheels, a user without privileges. No compiler, no source, no secrets: the
# job's config comes from a mounted file, and a secret from the environment through ${NAME} in it.
FROM python:${PYTHON_VERSION}-slim-bookworm AS runtime
ARG EXTRAS=prometheus,zookeeper
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m pip install --no-cache-dir --no-index --find-links /wheels \
        "$(ls /wheels/samzamp-*.whl)${EXTRAS:+[$EXTRAS]}" \
    && python -c "import samzamp._ring, samzamp._keyhash, samzamp._checksum, samzamp._fetchpack" \
    && samzamp --version
# A fixed uid/gid, so Kubernetes' runAsNonRoot can check it and fsGroup can match it.
RUN groupadd --system --gid 10001 samzamp \
    && useradd --system --uid 10001 --gid samzamp --home-dir /srv/job --no-create-home \
        --shell /usr/sbin/nologin samzamp \
    && mkdir -p /srv/job /etc/samzamp /var/lib/samzamp/stores \
    && chown samzamp:samzamp /srv/job /var/lib/samzamp /var/lib/samzamp/stores
# The job's code: `samzamp run` imports task.class from the current directory first.
WORKDIR /srv/job
# The stores (job.logged.store.base.dir = "/var/lib/samzamp/stores"): a volume, so that they outlive
# the container and a task restarted here restores only the changelog's tail.
VOLUME ["/var/lib/samzamp"]
USER 10001:10001
# /metrics and /healthz when the job sets metrics.prometheus.port = 9404.
EXPOSE 9404
# samzamp is PID 1 and handles SIGTERM itself (in-flight work, the final commit, exit 0); it
# starts and reaps its own worker processes, so no init is needed.
ENTRYPOINT ["samzamp"]
CMD ["run", "/etc/samzamp/job.toml"]
