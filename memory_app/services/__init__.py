"""Memory services: the only door from interfaces (tasks, API, CLI, proxy) to the
memory tables. Each module owns one concern; the engine decides, these write."""
