-- 011_pair_epochs: a per-pair epoch that fences model saves by more than
-- the model's version.
--
-- vantage_cursors.epoch counts the saves that replaced the pair's history
-- (a rewind or a rebuild replayed the stream); vantage_models.epoch is the
-- epoch the model was saved at, so that a model load returns it without
-- reading the cursor. A save names the version and the epoch of the model
-- it is based on and is refused when the cursor has either moved, so a
-- model saved before a rebuild (another instance's cached model, an apply
-- in flight) can no longer be saved over the rebuilt one at the same
-- version. Every pair starts at epoch 0.
--
-- Both columns have a constant default: adding them rewrites no row.
ALTER TABLE /* SCHEMA */.vantage_cursors ADD COLUMN epoch bigint NOT NULL DEFAULT 0;
ALTER TABLE /* SCHEMA */.vantage_models ADD COLUMN epoch bigint NOT NULL DEFAULT 0;
