"""ringleader: a gRPC service that orchestrates GPU collective jobs.

This package is the vocabulary every side shares and nothing else: the collective and job-spec
rules (spec, jobspec), the state machines (states), defaults and limits (defaults), the error
catalog (errors), JSON views of messages (jsonview), gRPC settings (grpc_options) and the
generated wire contract (v1). It imports no other package of the project; the application
entry points live in ringleader_app.
"""

__version__ = "0.1.0"
