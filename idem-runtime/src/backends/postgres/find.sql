-- The live record whose id is the hash tag of its key. $1 and $2 are the
-- lowest and highest keys with that tag, `idem:v1:{<id>}:` followed by 32
-- zeros and 32 `f`s: a range of the primary key's index (see
-- `PostgresStore::find` for why every key with that tag lies in it, whatever
-- the column's collation).
SELECT cur.key
FROM {table} AS cur
WHERE cur.key BETWEEN $1 AND $2 AND cur.expires_at > now()
LIMIT 1
