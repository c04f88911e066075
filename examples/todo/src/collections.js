// TanStack DB's electric collection over the same `todos` table, in on-demand mode: it follows
// the shape's changes only (`log=changes_only`) and loads rows with subset snapshots for the
// live queries that use it, here `done = false` (see OpenTodos.jsx). Its mutations go through
// the API and wait until the transaction's txid comes back through the shape.
import { electricCollectionOptions } from '@tanstack/electric-db-collection'
import { createCollection } from '@tanstack/react-db'

import { deleteTodo, setDone } from './api.js'
import { SHAPE_URL } from './config.js'

export const todosCollection = createCollection(
  electricCollectionOptions({
    id: 'todos',
    syncMode: 'on-demand',
    shapeOptions: {
      url: SHAPE_URL,
      // Full rows on update, so a todo that was not loaded (done, then reopened) arrives whole.
      params: { table: 'todos', replica: 'full' },
    },
    getKey: (todo) => todo.id,
    onUpdate: async ({ transaction }) => {
      const results = await Promise.all(
        transaction.mutations.map((m) => setDone(m.original.id, m.modified.done)),
      )
      return { txid: results.map((r) => r.txid) }
    },
    onDelete: async ({ transaction }) => {
      const results = await Promise.all(transaction.mutations.map((m) => deleteTodo(m.original.id)))
      return { txid: results.map((r) => r.txid) }
    },
  }),
)
