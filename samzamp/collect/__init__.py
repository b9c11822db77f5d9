"""4. Collect: completions in, contiguous committable offsets out; outputs to producers."""
