"""The worker: the Faust app and its wiring (factory), the agent, the decision over a batch
(dedup) and the sends of its outcomes, its metrics and the window watch."""
