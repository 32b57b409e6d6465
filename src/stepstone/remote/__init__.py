"""Runs that travel: push, pull, clone, and a lease so one agent drives a run.

The remote is any URL Git accepts; transport is plain `git` (so credentials,
SSH and proxies work as they do for the user). Run history moves as branches
of the dedicated store. The lease is a ref per run on the remote,
`refs/stepstone/leases/<run>`, whose commits say who holds the run until when;
it moves only by compare-and-swap (`git push --force-with-lease`), so two
agents can never both take it. A driver that takes the lease first brings the
remote's newer history of the run in (or stops when the copies diverged), and
before each effect it pushes the run with the lease in one atomic push: a
driver whose lease was stolen fails there, before it writes anything.

    git      the git runner (`GitFailed`) and which remote a store has
    sync     clone, push, pull, and the effects a divergence carries over
    lease    `Lease` and `LeaseKeeper`
    pusher   `BackgroundPusher`

Only the store touches the repository itself; these modules call its methods.
"""

from __future__ import annotations

from ..errors import GitFailed
from ..settings import LEASE_SECONDS_KEY
from .git import REMOTE_KEY, git, remote_name, remote_url, set_remote
from .lease import DEFAULT_LEASE_SECONDS, Lease, LeaseKeeper
from .pusher import BackgroundPusher
from .sync import PullResult, clone, effects_to_carry, pull, push, remote_tip

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "LEASE_SECONDS_KEY",
    "REMOTE_KEY",
    "BackgroundPusher",
    "GitFailed",
    "Lease",
    "LeaseKeeper",
    "PullResult",
    "clone",
    "effects_to_carry",
    "git",
    "pull",
    "push",
    "remote_name",
    "remote_tip",
    "remote_url",
    "set_remote",
]
