"""Confirmations: gated tasks waiting for a person — stored per worker, announced, reminded,
escalated, and approved or rejected.

An approved confirmation is the `approval_ref` a new run carries; the governance stage only
accepts it for the same gated policy (`gate_ref`), so one approval cannot unlock other work, and
the approved run never comes back to the gate. Every request is announced (a
``task.confirmation_requested`` inbox item and event); one left unanswered is reminded every
`remind_every` and escalated once after `escalate_after` (a P0 inbox item, naming the worker's
`reports_to`), and it stays pending until a person decides: nothing is dropped silently.

One concern per module:

- `models`: the `Confirmation` record, its policy, errors and event topics;
- `store`: the files under `tenants/{t}/workers/{w}/runtime/confirmations/` (and the governance
  ApprovalStore over them);
- `reminders`: the scan that reminds, escalates or closes unanswered ones;
- `resolve`: a person's decision acted on (the waiting run cancelled, superseded or continued).

How they are announced (inbox items, events, the briefs' interruption budget) is the autonomy
layer's: `genworker.autonomy.confirmation_notices`.
"""
