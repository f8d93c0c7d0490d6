-- Events that name a transfer are found by a 64-bit key of the transfer id (the first 8 bytes of
-- its SHA-256) instead of the id's text: about 55 bytes less per such event, in the row and its
-- index (docs/decisions.md#performance-as-the-data-grows). A key's match is confirmed against the
-- body's transferId. Rows written before keep transfer_id and its index.
ALTER TABLE events ADD COLUMN transfer_key INTEGER;
CREATE INDEX events_transfer_key ON events(transfer_key) WHERE transfer_key IS NOT NULL;
