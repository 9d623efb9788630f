-- A conversation being deleted is marked until when its delete may still be under way (`deleting_until`):
-- no process reserves a run in it meanwhile (`pheby.runs.journal`). A delete that fails clears the mark; one
-- whose process died leaves it to lapse.
ALTER TABLE conversations ADD COLUMN deleting_until REAL;
