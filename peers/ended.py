"""Absence proved by protocol state: once the broker has ended a session, nothing more arrives on it.

A wait for a frame the broker can no longer send need not run to its time-out. AMQP 1.0 says when a frame
cannot come, whatever the broker's speed:

- 2.5.5 and 2.7.8: the broker's ``end`` unmaps the session's channel. A frame of that session (transfer,
  flow, disposition, attach, detach) cannot follow its ``end``: frames of one connection arrive in order, so
  whatever the broker sent on the session before its ``end`` has been read once the ``end`` is.
- 2.6.3 and 2.7.7: the broker's ``detach`` of a link ends its transfers; no transfer for the link can follow.

Connection-level frames (``close``, a new ``begin``) can still come, so a wait for them is never cut here.
The end of the socket already ends every wait (:meth:`ScriptedPeer.pump`).
"""

from __future__ import annotations

from proton import Connection, Endpoint, Link, Session

ANY_SESSION = "any-session"  # the awaited frame may come on any of the connection's sessions


def _sessions(connection: Connection) -> list[Session]:
    """The connection's sessions the peer has begun (a session proton only created does not count)."""
    found = []
    session = connection.session_head(0)
    while session is not None:
        if not session.state & Endpoint.LOCAL_UNINIT:
            found.append(session)
        session = session.next(0)
    return found


def nothing_more(on: Session | Link | str | None, connection: Connection) -> str | None:
    """Why no frame awaited ``on`` can arrive any more (a sentence for the evidence), or None when one still can.

    ``on`` is the link whose transfers are awaited, the session whose frames are, or :data:`ANY_SESSION` (a
    frame of whichever session: true only when the broker has ended every session begun). None: no proof.
    """
    if on is None:
        return None
    if on == ANY_SESSION:
        sessions = _sessions(connection)
        if sessions and all(s.state & Endpoint.REMOTE_CLOSED for s in sessions):
            return "the broker had ended every session of the connection"
        return None
    assert isinstance(on, (Session, Link)), on
    session = on if isinstance(on, Session) else on.session
    if session.state & Endpoint.REMOTE_CLOSED:
        return "the broker had ended the session"
    if isinstance(on, Link) and on.state & Endpoint.REMOTE_CLOSED:
        return f"the broker had detached link {on.name}"
    return None
