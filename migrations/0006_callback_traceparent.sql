-- Issue 6: a callback carries the W3C trace context of the step that produced its event, so a
-- receiver's handling joins the node step's trace. NULL when tracing is off.
ALTER TABLE movement_callback_outbox ADD COLUMN traceparent text;
