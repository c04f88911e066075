// Every todo, through @electric-sql/react's useShape: the whole `todos` shape, kept live.
import { useShape } from '@electric-sql/react'

import { deleteTodo, setDone } from './api.js'
import { SHAPE_URL } from './config.js'
import TodoItem, { byCreation } from './TodoItem.jsx'

const report = (e) => console.error(e)

export default function AllTodos() {
  const { data, isLoading, error } = useShape({ url: SHAPE_URL, params: { table: 'todos' } })
  const todos = [...data].sort(byCreation)
  const open = todos.filter((t) => !t.done).length

  return (
    <section data-testid="all-view">
      <h2>All todos</h2>
      <p className="muted">
        <code>useShape</code> from <code>@electric-sql/react</code>
      </p>
      <p className="status" data-testid="all-status">
        {error ? `error: ${error.message}` : isLoading ? 'loading…' : `${todos.length} todos, ${open} open`}
      </p>
      <ul data-testid="all-list">
        {todos.map((todo) => (
          <TodoItem
            key={todo.id}
            todo={todo}
            onToggle={(t) => setDone(t.id, !t.done).catch(report)}
            onDelete={(t) => deleteTodo(t.id).catch(report)}
          />
        ))}
      </ul>
    </section>
  )
}
