"""``Repeats``: a device's unary ``executeSynchronously_1_3`` layouts that repeat, found by a
message's bytes.

A client calling one prepared model again and again mostly sends one layout: the same
session, prepared model, arguments and pool sizes, only the inline pools' data differing —
as a burst's messages do (``repeat.Repeat``, whose module docstring says what a repeated
layout is and every per-call rule its answer still runs through its owner). A unary call has
no stream to keep its layout on, so the device's ``executeSynchronously_1_3`` handler
(``rpc.direct.execute_sync``) keeps a small table of them: a :class:`~repeat.Repeat` made
from a message the lean path ran for its model's lane and answered the common answer
(``prepared_model_servicer.repeat_of`` without ``burst``: the unary message's pools' data,
``wire_spans.UNARY_POOL_DATA``, and an ``ExecuteResult``'s head), found for a later message by
its length and its first segment (the bytes before its data), then :meth:`Template.match
<nnhal.core.wire_spans.Template.match>` (the bytes outside the data carry the session id and
the prepared model's handle: a match is the same session, model and layout). Its runs are
covered by the session's standing charge (``Session.standing``, ``lean.launch_inline``'s: given
back with the session); a layout that charge can never cover is not kept
(``Standing.may_cover``).

Bounded: at most :data:`LAYOUTS` kept. A new layout is kept while there is room; once the
table is full, it replaces the oldest when that one is stale, else only one in ``LAYOUTS``
times (:meth:`Repeats.admits`, asked before a Repeat is made): more clients calling round
robin than the table holds would otherwise replace every layout before its next call — each
call a miss that makes a Repeat — where now the layouts kept keep repeating, the others take
the full path at the cost of one test, and the table still follows a working set that moves.
A layout of a closed session or a released model is answered by the full path
(``Repeat.answer`` says so: it holds them weakly) and dropped from the table then
(:meth:`Repeats.drop_stale`), and every such entry is dropped as a new layout is added
(:meth:`Repeats.add`). No entry keeps a session's, model's, plan's or lane's objects alive
(all held weakly, let go with the session or the model); a stale entry keeps until then only
bytes: its template's (the message's bytes outside its data), its answer's head, its output
places (at most the standing charge's ``STANDING_MAX_BYTES``, made under it) and the session's
``Standing`` (a budget and a name), at most ``LAYOUTS`` of them. Used on the event loop's
thread only (the handler's): no lock.
"""

from __future__ import annotations

from nnhal.core.wire_spans import Template
from nnhal.server.executions.repeat import Repeat

#: The most layouts a device keeps (:class:`Repeats`); a full table admits one new layout in
#: this many (:meth:`Repeats.admits`).
LAYOUTS = 64


def stale(repeat: Repeat) -> bool:
    """Whether ``repeat``'s session is closed or gone, or its prepared model released or gone
    (the full path refuses its messages: nothing to keep it for)."""
    return repeat.found() is None


#: Per message length, the layouts of that length by their first segment (the bytes before their
#: first data: the session id, the model's handle and the request's head), with its length:
#: a message's prefix of that length is looked up (``Repeats.find``).
_Heads = list[tuple[int, dict[bytes, list[Repeat]]]]


class Repeats:
    """A bounded table of unary repeated layouts (module docstring), oldest first."""

    __slots__ = ("_by_length", "_order", "_refused", "limit")

    def __init__(self, limit: int = LAYOUTS) -> None:
        self.limit = limit
        #: New layouts not admitted since one last was to a full table (:meth:`admits`).
        self._refused = 0
        #: The layouts by their messages' length, then their first segments (:data:`_Heads`):
        #: many clients' layouts of one model are all of one length.
        self._by_length: dict[int, _Heads] = {}
        #: Every layout kept, oldest first.
        self._order: list[Repeat] = []

    def __len__(self) -> int:
        return len(self._order)

    def find(self, raw: bytes) -> Repeat | None:
        """The layout ``raw`` is a message of (its length, its first segment — one slice and one
        lookup, however many clients' layouts are of its length — then its template's match), or
        None."""
        for cut, by_head in self._by_length.get(len(raw), ()):
            for repeat in by_head.get(raw[:cut], ()):
                if repeat.match(raw):
                    return repeat
        return None

    def admits(self) -> bool:
        """Whether a new layout would be kept (:meth:`add`) — asked before one is made: room in
        the table, or its oldest stale, or the turn of one in ``limit`` layouts refused by a full
        table (module docstring)."""
        order = self._order
        if len(order) < self.limit or stale(order[0]):
            return True
        self._refused += 1
        if self._refused < self.limit:
            return False
        self._refused = 0
        return True

    def add(self, repeat: Repeat | None) -> None:
        """Keep ``repeat`` (None: nothing): every stale layout dropped first (an add is once per
        layout, not per call), then the oldest when the table is full still."""
        if repeat is None:
            return
        for old in [r for r in self._order if stale(r)]:
            self._drop(old)
        if len(self._order) >= self.limit:
            self._drop(self._order[0])
        self._order.append(repeat)
        template = repeat.template
        self._heads(template).setdefault(template.segments[0], []).append(repeat)

    def drop_stale(self, repeat: Repeat) -> None:
        """Drop ``repeat`` when it is stale (its message just took the full path)."""
        if stale(repeat) and repeat in self._order:
            self._drop(repeat)

    def _heads(self, template: Template) -> dict[bytes, list[Repeat]]:
        """The layouts of ``template``'s length whose first segments are as long as its own, by
        their first segments (made empty when none)."""
        cut = len(template.segments[0])
        heads = self._by_length.setdefault(template.length, [])
        for known, by_head in heads:
            if known == cut:
                return by_head
        made: dict[bytes, list[Repeat]] = {}
        heads.append((cut, made))
        return made

    def _drop(self, repeat: Repeat) -> None:
        self._order.remove(repeat)
        template = repeat.template
        head = template.segments[0]
        by_head = self._heads(template)
        same = by_head[head]
        same.remove(repeat)
        if same:
            return
        del by_head[head]
        if by_head:
            return
        heads = self._by_length[template.length]
        heads[:] = [entry for entry in heads if entry[1] is not by_head]
        if not heads:
            del self._by_length[template.length]
