"""The Git store: each run is a ref whose commits hold the run's files.

A store is any Git repository whose refs hold runs. What makes a ref a run
travels with the repository: a run's commits carry a `Stepstone-Run:` trailer,
so any copy (`git clone`, bare or with a work tree, `cp -r`, a tarball) is read
as the same store with the same runs. A run lives in one of two places:
`refs/stepstone/runs/<run>` (any repository, the notebook's own project
included, which is never touched elsewhere: not its branches, index or work
tree) or the branch `refs/heads/<run>` (a store of stepstone's own, such as the
embedded default `.stepstone/`, where HEAD names the run driven last so that
`git -C .stepstone log` shows it). In a work-tree clone of such a store, a run
that is only on a remote-tracking branch (`refs/remotes/origin/<run>`) is read
from there and continues on its local branch, as `git checkout` would.

`GitStore` is the only door in. It shows the collaborators it is made of (`refs`,
`config`, `reader`, `writer`, `derived`, `upkeep`, `repairs`), and does what combines
them or reads objects itself; one module per job:

    opening      finding, opening and creating a store; who drives; flushing
    config       the store's Git config and remotes
    objects      reading commits, trees and blobs (libgit2), within bounds
    refs         where runs live, and every ref write (runs, HEAD, tags, leases)
    derived      derived data keyed by tree id (the read cache, the step index)
    reading      a run's commit and files
    writing      a run's commit: one pack (`gitobjects`, `packs`), then the ref
                 by compare-and-swap (`durable`)
    bigblobs     big values: each streamed into a pack of its own, uncompressed,
                 and read back without zlib
    maintenance  pack merges, `git gc`, repair of a damaged run
    torn         packs a power cut tore, checked after a reboot and set aside
    errors       the one translation of libgit2 and OS errors into `StoreError`s

pygit2 is imported by these modules only.
"""

from __future__ import annotations

from .bigblobs import StoredBlob
from .derived import CACHE_AFTER, CatchUp, write_derived
from .gitstore import GitStore
from .maintenance import GIT_OPTIONS
from .objects import CommitInfo
from .opening import DEFAULT_STORE, holder_identity, resolve_store_path
from .reading import Snapshot
from .refs import (
    BRANCH_REFS,
    DIVERGED_REFS,
    LEASE_REFS,
    RUN_REFS,
    TAG_REFS,
    TRACKING_LEASE_REFS,
    TRACKING_REFS,
)

__all__ = [
    "BRANCH_REFS",
    "CACHE_AFTER",
    "DEFAULT_STORE",
    "DIVERGED_REFS",
    "GIT_OPTIONS",
    "LEASE_REFS",
    "RUN_REFS",
    "TAG_REFS",
    "TRACKING_LEASE_REFS",
    "TRACKING_REFS",
    "CatchUp",
    "CommitInfo",
    "GitStore",
    "Snapshot",
    "StoredBlob",
    "holder_identity",
    "resolve_store_path",
    "write_derived",
]
