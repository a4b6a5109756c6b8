-- Release, fenced. $1 key, $2 token. One row affected = released.
DELETE FROM {table}
WHERE key = $1 AND state = 'in_flight' AND token = $2 AND expires_at > now()
