"""This process's disk-cache counters: read by trident.cache.stats(), counted by warm start and by the loading of
stored Triton binaries (launch_sites.py)."""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class Stats:
    """This process's disk-cache events (trident.cache.stats())."""

    lookups: int = 0  # misses that consulted the disk cache
    loads: int = 0  # specializations loaded instead of compiled
    stores: int = 0  # specializations persisted
    not_persisted: int = 0  # compiled specializations left out (reason logged under TRIDENT_LOG=cache)
    rejected: int = 0  # records whose checks or guard did not accept a call
    corrupt: int = 0  # records removed as truncated or altered
    write_failures: int = 0  # publishes the file system refused (the first one is logged as a warning)
    untrusted: int = 0  # records not read and publishes not written: someone else could write there (runtime/trust.py)
    triton_binaries_loaded: int = 0  # distinct Triton binaries (cubins) loaded for loaded specializations
    triton_binary_load_ms: float = 0.0  # the time that took (a warm start's share that is Triton's loader's)


stats = Stats()
