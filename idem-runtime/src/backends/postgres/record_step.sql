-- Records a durable step, fenced: appended to the steps of the execution
-- that holds token $2 (in flight, its lease running or not, or held). $1
-- key, $3 the step's name, $4 its result. One row affected = the record
-- holds the token. A name already recorded keeps its first result: the row
-- is left as it was (the same step sent again after a lost answer).
-- The result is kept as base64, without the line breaks `encode` adds.
UPDATE {table}
SET steps = CASE WHEN coalesce(steps @> jsonb_build_array(jsonb_build_object('n', $3::text)), false) THEN steps
                 ELSE coalesce(steps, '[]'::jsonb)
                      || jsonb_build_array(jsonb_build_object('n', $3::text,
                                                              'v', translate(encode($4, 'base64'), E'\n', '')))
            END
WHERE key = $1 AND state = 'in_flight' AND token = $2 AND expires_at > now()
