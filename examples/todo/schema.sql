-- The todos table the example syncs. Safe to run again: it creates the table only if it is
-- missing and adds the three sample rows only to an empty table.
CREATE TABLE IF NOT EXISTS todos (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  title text NOT NULL,
  done boolean NOT NULL DEFAULT false,
  created_at timestamptz DEFAULT now()
);

INSERT INTO todos (title, done, created_at)
SELECT title, done, now() + n * interval '1 millisecond'
FROM (VALUES ('Start Syncline', true, 1),
             ('Open the todo example', false, 2),
             ('Add a todo from psql', false, 3)) AS sample (title, done, n)
WHERE NOT EXISTS (SELECT 1 FROM todos);
