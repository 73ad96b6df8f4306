"""The harness side of the client shims (``peers/shims/README.md``): load a shim's ``shim.toml``, check the version
its build file pins, build it once into the cache folder, and talk to it.

    spec = discover()["rhea"]            # ShimSpec, strictly loaded
    check_pin(spec)                      # shim.toml's version is the build file's
    home = ensure_built(spec)            # <cache>/shims/rhea-3.0.5, built once per change of its sources
    with ShimProcess(spec, home) as shim:
        shim.request("hello", timeout=10)
"""

from .build import ensure_built, home_of, require_tools, source_digest
from .crash import LibraryCrash
from .errors import ShimError, ShimExited, ShimTimeout, ShimUnavailable
from .pins import check_pin, pinned_versions
from .process import ShimEvent, ShimProcess, ShimReply
from .spec import SHIMS_ROOT, ShimSpec, discover, load_spec

__all__ = [
    "SHIMS_ROOT",
    "LibraryCrash",
    "ShimError",
    "ShimEvent",
    "ShimExited",
    "ShimProcess",
    "ShimReply",
    "ShimSpec",
    "ShimTimeout",
    "ShimUnavailable",
    "check_pin",
    "discover",
    "ensure_built",
    "home_of",
    "load_spec",
    "pinned_versions",
    "require_tools",
    "source_digest",
]
