-- TTLs that are not a positive number of minutes up to 100 years (52,596,000 minutes,
-- MAX_TTL_MINUTES) were accepted before the API bounded them. Reading such a row is safe
-- now, but refreshing its expiry overflowed (on Postgres, inside fawn_create_run and
-- fawn_finish_run, so every run on that thread failed). They become "no TTL".
UPDATE threads SET ttl_minutes = NULL, ttl_strategy = NULL, expires_at = NULL
 WHERE ttl_minutes IS NOT NULL AND NOT (ttl_minutes > 0 AND ttl_minutes <= 52596000);
UPDATE store_items SET ttl_minutes = NULL, expires_at = NULL
 WHERE ttl_minutes IS NOT NULL AND NOT (ttl_minutes > 0 AND ttl_minutes <= 52596000);
