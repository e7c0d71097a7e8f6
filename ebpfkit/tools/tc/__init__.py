"""`ebpfkit tc`: a node's fast path between its endpoints' namespaces and out of it (redirect).
Sessions: ``open_redirect`` (session.py)."""

from .endpoints import Endpoint
from .session import RedirectConfig, RedirectSession, open_redirect

__all__ = ["Endpoint", "RedirectConfig", "RedirectSession", "open_redirect"]
