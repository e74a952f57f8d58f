"""Tasks and their datasets: the registry, the loaders and the generated tasks."""
