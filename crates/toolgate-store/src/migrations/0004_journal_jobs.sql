-- toolgate state, version 4: a call that started a background job says which, and when the job
-- has ended, how: {"id", "state", "exit_code", "output_bytes"} as JSON text.
ALTER TABLE journal ADD COLUMN job TEXT;
