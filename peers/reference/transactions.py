"""Transactions of the reference broker (AMQP 1.0 section 4; UM 10.11 transactional rows). No I/O.

A controller declares a transaction on a coordinator link and gets a txn-id; transactional work (a
publish, or a subscriber's acknowledgement) is staged under that id as a pair of actions; discharging
runs every commit action in order (``fail=false``) or every rollback action (``fail=true``) and forgets
the transaction. An unknown or already discharged txn-id raises :class:`UnknownTransaction`
(``amqp:transaction:unknown-id``). Transactions still open when their owner goes away, or when the control
link that declared them is closed (AMQP 1.0 4.1), are rolled back.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Action = Callable[[], None]
UNKNOWN_ID = "amqp:transaction:unknown-id"


class UnknownTransaction(KeyError):
    """No open transaction has this txn-id."""


@dataclass
class Transaction:
    """One declared transaction: its id, owner, the name of the control link that declared it, and the
    (commit, rollback) actions staged under it."""

    txn_id: bytes
    owner: Any
    control: str | None = None
    work: list[tuple[Action, Action]] = field(default_factory=list)


def _noop() -> None:
    return None


class TransactionManager:
    """All open transactions of the broker, by txn-id."""

    def __init__(self) -> None:
        self.open: dict[bytes, Transaction] = {}
        self._prefix = uuid.uuid4().hex[:8]
        self._counter = itertools.count(1)

    def declare(self, owner: Any, control: str | None = None) -> bytes:
        """Start a transaction for ``owner`` (a connection) on its control link ``control`` (the link's name);
        returns its new, unique txn-id."""
        txn_id = f"txn-{self._prefix}-{next(self._counter)}".encode()
        self.open[txn_id] = Transaction(txn_id, owner, control)
        return txn_id

    def get(self, txn_id: bytes) -> Transaction:
        """The open transaction ``txn_id``; raises :class:`UnknownTransaction` when there is none."""
        try:
            return self.open[bytes(txn_id)]
        except KeyError:
            raise UnknownTransaction(bytes(txn_id)) from None

    def stage(self, txn_id: bytes, commit: Action, rollback: Action = _noop) -> None:
        """Stage work under ``txn_id``: ``commit`` runs if it commits, ``rollback`` if it rolls back."""
        self.get(txn_id).work.append((commit, rollback))

    def discharge(self, txn_id: bytes, fail: bool) -> int:
        """End ``txn_id``: run its commit actions (``fail`` false) or rollback actions, in staging order.

        Returns how many pieces of work were applied; raises :class:`UnknownTransaction` for an unknown id.
        """
        transaction = self.get(txn_id)
        del self.open[transaction.txn_id]
        for commit, rollback in transaction.work:
            (rollback if fail else commit)()
        return len(transaction.work)

    def abandon(self, owner: Any, control: str | None = None) -> int:
        """Roll back every transaction ``owner`` still has open (its connection went away) or, given ``control``,
        those it declared on that control link, now closed: AMQP 1.0 4.1 rolls them back at once, and a later
        discharge of one fails as for an unknown txn-id. Returns how many."""
        mine = [txn_id for txn_id, t in self.open.items()
                if t.owner is owner and (control is None or t.control == control)]
        for txn_id in mine:
            self.discharge(txn_id, fail=True)
        return len(mine)
