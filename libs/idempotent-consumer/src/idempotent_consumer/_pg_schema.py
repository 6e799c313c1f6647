"""The PostgreSQL store's DDL: the partitioned records table and its two PL/pgSQL functions.

``<table>_claim`` is the claim in one statement (``INSERT ... ON CONFLICT DO NOTHING`` under a
transaction-level advisory lock on the (processor, event id) pair, so the look-up across
partitions and the insert are one atomic step); ``<table>_finish`` is the holder's complete,
release or extend under the same lock. ``python -m idempotent_consumer schema --print``
shows the SQL this module renders.
"""

from __future__ import annotations

import uuid
from typing import Any

from ._base import ClaimReply, ClaimRequest, Held, Outcome, millis


def schema_sql(table: str, lock_namespace: int) -> str:
    """The DDL of the table and its functions (idempotent: safe to run again)."""
    t = table
    # 64 bits of the key (the one-bigint form of the advisory locks, seeded per table): a
    # 32-bit hash makes two live ids collide about once in 77,000, and a collision answers
    # "busy" for an id nobody holds.
    lock = f"hashtextextended(p_processor || chr(31) || p_event_id, {lock_namespace})"
    return f"""
CREATE TABLE IF NOT EXISTS {t} (
    processor    text        NOT NULL,  -- the consumer group's namespace
    event_id     text        NOT NULL,  -- the producer's id of the event
    period       timestamptz NOT NULL,  -- start of the partition period of the first claim
    state        "char"      NOT NULL,  -- 'p' in progress, 'c' completed
    token        uuid        NOT NULL,  -- the current holder's claim (fences old holders out)
    payload_hash bytea,                 -- SHA-256 of the first claim's payload, if given
    claimed_at   timestamptz NOT NULL,
    lease_until  timestamptz,           -- in progress: when another holder may take over
    expires_at   timestamptz NOT NULL,  -- after this the id counts as new again
    attempts     integer     NOT NULL,  -- claims so far (2+: taken over from a dead holder)
    result       bytea,                 -- completed: the first run's serialized result
    completed_at timestamptz,
    PRIMARY KEY (processor, event_id, period)
) PARTITION BY RANGE (period);

CREATE OR REPLACE FUNCTION {t}_claim(
    p_processor text, p_event_id text, p_hash bytea, p_token uuid,
    p_lease_ms bigint, p_expire_ms bigint, p_period_s bigint, p_block_ms bigint,
    OUT outcome text, OUT o_result bytea, OUT o_retry_ms bigint, OUT o_attempts integer,
    OUT o_period timestamptz)
LANGUAGE plpgsql AS $fn$
DECLARE
    r {t}%ROWTYPE;
    v_now timestamptz := clock_timestamp();
    v_lock bigint := {lock};
    v_found boolean;
    v_rows integer;
    v_lock_timeout text;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'idempotency claims need READ COMMITTED, not %',
            current_setting('transaction_isolation') USING ERRCODE = 'feature_not_supported';
    END IF;
    -- One claim, complete, release or extend of this (processor, event id) at a time, across
    -- all partitions ({t}_finish takes the same lock).
    -- Joined to a transaction and asked to wait: wait for the other transaction's claim
    -- (its lock) at most p_block_ms (lock_timeout applies to advisory locks too), then
    -- answer busy; the caller's own lock_timeout is put back either way, and the caught
    -- error rolls back only this block's subtransaction, not the caller's transaction.
    IF p_block_ms IS NOT NULL AND p_block_ms > 0 THEN
        v_lock_timeout := current_setting('lock_timeout');
        PERFORM set_config('lock_timeout', p_block_ms || 'ms', true);
        BEGIN
            PERFORM pg_advisory_xact_lock(v_lock);
        EXCEPTION WHEN lock_not_available THEN
            PERFORM set_config('lock_timeout', v_lock_timeout, true);
            outcome := 'busy';
            o_retry_ms := p_lease_ms;  -- a hint: the other claim is not visible from here
            RETURN;
        END;
        PERFORM set_config('lock_timeout', v_lock_timeout, true);
    ELSIF NOT pg_try_advisory_xact_lock(v_lock) THEN
        outcome := 'busy';
        RETURN;
    END IF;
    SELECT * INTO r FROM {t}
     WHERE processor = p_processor AND event_id = p_event_id
     ORDER BY period DESC LIMIT 1;
    v_found := FOUND;
    -- An expired record is gone when it is completed (a repeat that late runs again). An
    -- expired claim still in progress is not forgotten: its holder crashed or hung, maybe
    -- after its effect, so the next claim takes it over below (attempts + 1, taken_over)
    -- rather than starting afresh (attempts 1); only another payload under the id makes
    -- that claim a new event. A live claim (a holder that extended its lease past
    -- expires_at) is never deleted: a second holder would run the effect.
    IF v_found AND r.expires_at <= v_now AND (r.state = 'c' OR (
            r.lease_until <= v_now AND r.payload_hash IS NOT NULL AND p_hash IS NOT NULL
            AND r.payload_hash <> p_hash)) THEN
        DELETE FROM {t} WHERE processor = p_processor AND event_id = p_event_id;
        v_found := false;
    END IF;
    IF NOT v_found THEN
        o_period := to_timestamp(floor(extract(epoch FROM v_now) / p_period_s) * p_period_s);
        BEGIN
            INSERT INTO {t} (processor, event_id, period, state, token, payload_hash,
                             claimed_at, lease_until, expires_at, attempts)
            VALUES (p_processor, p_event_id, o_period, 'p', p_token, p_hash, v_now,
                    v_now + p_lease_ms * interval '1 millisecond',
                    v_now + p_expire_ms * interval '1 millisecond', 1)
            ON CONFLICT DO NOTHING;
        EXCEPTION WHEN check_violation THEN
            -- No partition for now: answered, not raised, so a caller's transaction that
            -- this claim joined survives; the store creates the partition and asks again.
            outcome := 'no_partition';
            RETURN;
        END;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        IF v_rows = 1 THEN
            outcome := 'acquired';
            o_attempts := 1;
            RETURN;
        END IF;
        RAISE EXCEPTION 'claim of % conflicted under its lock', p_event_id;  -- cannot happen
    END IF;
    o_period := r.period;
    o_attempts := r.attempts;
    IF r.payload_hash IS NOT NULL AND p_hash IS NOT NULL AND r.payload_hash <> p_hash THEN
        outcome := 'mismatch';
        RETURN;
    END IF;
    IF r.state = 'c' THEN
        outcome := 'completed';
        o_result := r.result;
        RETURN;
    END IF;
    IF r.lease_until > v_now THEN
        outcome := 'in_progress';
        o_retry_ms := ceil(extract(epoch FROM r.lease_until - v_now) * 1000);
        RETURN;
    END IF;
    -- The holder's lease ended (it crashed or hung): take the claim over, only from the row
    -- as read (its token, still in progress, lease still ended). The lock keeps the old
    -- holder's complete and release out; the conditions and the row count keep this step
    -- right on its own: a row that changed or vanished is never taken over, the caller
    -- is told to ask again.
    UPDATE {t} SET token = p_token, attempts = r.attempts + 1,
                   lease_until = v_now + p_lease_ms * interval '1 millisecond',
                   expires_at = greatest(
                       r.expires_at, v_now + p_expire_ms * interval '1 millisecond'),
                   payload_hash = coalesce(r.payload_hash, p_hash)
     WHERE processor = p_processor AND event_id = p_event_id AND period = r.period
       AND token = r.token AND state = 'p' AND lease_until <= v_now;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    IF v_rows <> 1 THEN
        outcome := 'busy';
        RETURN;
    END IF;
    outcome := 'taken_over';
    o_attempts := r.attempts + 1;
END
$fn$;

-- 1.0's claim (p_block boolean: wait on the lock with no limit), kept for processes not yet
-- upgraded: it waits at most a lease, then answers busy (1.0 asks again).
CREATE OR REPLACE FUNCTION {t}_claim(
    p_processor text, p_event_id text, p_hash bytea, p_token uuid,
    p_lease_ms bigint, p_expire_ms bigint, p_period_s bigint, p_block boolean,
    OUT outcome text, OUT o_result bytea, OUT o_retry_ms bigint, OUT o_attempts integer,
    OUT o_period timestamptz)
LANGUAGE sql AS $fn$
    SELECT * FROM {t}_claim(p_processor, p_event_id, p_hash, p_token, p_lease_ms,
                            p_expire_ms, p_period_s,
                            (CASE WHEN p_block THEN p_lease_ms END)::bigint)
$fn$;

-- The holder's complete ('c'), release ('r') or extend ('e'), under the claim's lock: without
-- it a late complete or release could commit between a takeover's read and its update.
-- Returns the rows changed (1: done; 0: the token no longer holds the record).
CREATE OR REPLACE FUNCTION {t}_finish(
    p_processor text, p_event_id text, p_period timestamptz, p_token uuid,
    p_action "char", p_result bytea, p_lease_ms bigint)
RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    v_rows integer;
BEGIN
    PERFORM pg_advisory_xact_lock({lock});
    IF p_action = 'c' THEN
        UPDATE {t} SET state = 'c', result = p_result, lease_until = NULL,
                       completed_at = clock_timestamp()
         WHERE processor = p_processor AND event_id = p_event_id AND period = p_period
           AND token = p_token AND state = 'p';
    ELSIF p_action = 'r' THEN
        DELETE FROM {t}
         WHERE processor = p_processor AND event_id = p_event_id AND period = p_period
           AND token = p_token AND state = 'p';
    ELSE
        -- The record is kept at least as long as the claim it holds.
        UPDATE {t} SET lease_until = clock_timestamp() + p_lease_ms * interval '1 millisecond',
                       expires_at = greatest(
                           expires_at, clock_timestamp() + p_lease_ms * interval '1 millisecond')
         WHERE processor = p_processor AND event_id = p_event_id AND period = p_period
           AND token = p_token AND state = 'p';
    END IF;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END
$fn$;
"""


class Calls:
    """How a store calls the two functions of one table: the statements, their parameters,
    and the claim's reply."""

    def __init__(self, table: str, period_s: int) -> None:
        self.period_s = period_s
        self.claim_sql = (
            f"SELECT outcome, o_result, o_retry_ms, o_attempts, o_period "
            f"FROM {table}_claim(%s, %s, %s, %s, %s, %s, %s, %s::bigint)"
        )
        self.finish_sql = f"SELECT {table}_finish(%s, %s, %s, %s, %s, %s, %s)"

    def claim_params(self, r: ClaimRequest) -> tuple[Any, ...]:
        return (
            r.processor,
            r.event_id,
            r.payload_hash,
            uuid.UUID(hex=r.token),
            millis(r.lease),
            millis(r.expire_after),
            self.period_s,
            None if r.block is None else millis(r.block),
        )

    @staticmethod
    def reply(row: tuple[Any, ...] | None) -> ClaimReply | None:
        """The claim's reply; None when the current period has no partition yet."""
        assert row is not None
        outcome, result, retry_ms, attempts, period = row
        if outcome == "no_partition":
            return None
        return ClaimReply(
            Outcome(outcome),
            result=bytes(result) if result is not None else None,
            retry_after=retry_ms / 1000 if retry_ms else None,
            attempts=attempts,
            locator=period,
        )

    @staticmethod
    def finish_params(held: Held, action: str, result: bytes | None, lease_ms: int) -> Any:
        token = uuid.UUID(hex=held.token)
        return (held.processor, held.event_id, held.locator, token, action, result, lease_ms)
