"""The control core: the reactor (Control.handle), its inputs, the job book, registry, scheduler, warm groups, and the async facade."""
