"""`veristep serve`: verifiers as an HTTP service (native rows, OpenRLHF, slime), and its parts."""

from .service import RequestError, ServeConfig, Service

__all__ = ["RequestError", "ServeConfig", "Service"]
