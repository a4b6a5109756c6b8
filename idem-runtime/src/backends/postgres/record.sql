    cur.key,
    cur.fingerprint,
    cur.state,
    cur.token,
    cur.state = 'in_flight' AND coalesce(cur.held, false) AS held,
    (extract(epoch FROM greatest(cur.lease_until - now(), interval '0')) * 1000000)::bigint AS lease_left_us,
    (extract(epoch FROM greatest(cur.expires_at - now(), interval '0')) * 1000000)::bigint AS ttl_left_us,
    cur.status,
    cur.header_names,
    cur.header_values,
    cur.body,
    cur.attempt,
    cur.route,
    (extract(epoch FROM cur.claimed_at) * 1000000)::bigint AS claimed_at_us,
    -- In flight, held or released (a tombstone keeps them for the next
    -- execution): an earlier version's completion leaves them in place.
    CASE WHEN cur.state IN ('in_flight', 'released') THEN {step_names} END AS step_names,
    CASE WHEN cur.state IN ('in_flight', 'released') THEN {step_values} END AS step_values
