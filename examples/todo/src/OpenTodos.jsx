// Open todos only, through TanStack DB: a live query with `where done = false` over the
// on-demand electric collection, which loads just those rows from Syncline (a subset snapshot)
// and then follows the shape's changes.
import { eq, useLiveQuery } from '@tanstack/react-db'
import { useState } from 'react'

import { todosCollection } from './collections.js'
import TodoItem, { byCreation } from './TodoItem.jsx'

export default function OpenTodos() {
  const { data, isLoading, isError } = useLiveQuery((q) =>
    q
      .from({ todo: todosCollection })
      .where(({ todo }) => eq(todo.done, false))
      .orderBy(({ todo }) => todo.created_at, 'asc'),
  )
  const todos = [...(data ?? [])].sort(byCreation)
  // Mutations apply optimistically at once; they are settled when the API has written them and
  // their txid came back through the shape (or rolled back if that failed).
  const [saving, setSaving] = useState(0)
  const [writeError, setWriteError] = useState(null)
  function track(transaction) {
    setSaving((n) => n + 1)
    transaction.isPersisted.promise
      .then(
        () => setWriteError(null),
        (e) => {
          console.error(e)
          setWriteError(e.message)
        },
      )
      .finally(() => setSaving((n) => n - 1))
  }

  return (
    <section data-testid="open-view">
      <h2>Open todos</h2>
      <p className="muted">
        <code>@tanstack/react-db</code> live query, on-demand electric collection
      </p>
      <p className="status" data-testid="open-status" data-saving={saving}>
        {isError ? 'error' : isLoading ? 'loading…' : `${todos.length} open`}
        {saving > 0 && ', saving…'}
      </p>
      {writeError && (
        <p className="error" data-testid="open-error">
          {writeError}
        </p>
      )}
      <ul data-testid="open-list">
        {todos.map((todo) => (
          <TodoItem
            key={todo.id}
            todo={todo}
            onToggle={(t) =>
              track(
                todosCollection.update(t.id, (draft) => {
                  draft.done = !t.done
                }),
              )
            }
            onDelete={(t) => track(todosCollection.delete(t.id))}
          />
        ))}
      </ul>
    </section>
  )
}
