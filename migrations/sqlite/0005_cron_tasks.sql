-- A cron can carry a DeerFlow scheduled task (title, prompt, schedule as the user wrote it,
-- …) as a JSON object; NULL for a plain LangGraph cron. Runs a cron created name it in
-- `metadata.cron_id`; the index lists a cron's runs without reading every run.
ALTER TABLE crons ADD COLUMN task TEXT;
CREATE INDEX runs_cron ON runs (json_extract(metadata, '$.cron_id'), created_at);
