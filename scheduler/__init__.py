"""The scheduler: APScheduler jobs built from the registry, RUN sent through every router."""
