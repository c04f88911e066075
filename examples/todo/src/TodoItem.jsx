/** One row of either list; `onToggle`/`onDelete` do the write, the list updates from the shape. */
export default function TodoItem({ todo, onToggle, onDelete }) {
  return (
    <li data-testid="todo" data-id={todo.id} data-done={String(todo.done)} className={todo.done ? 'done' : ''}>
      <label>
        <input type="checkbox" checked={todo.done} onChange={() => onToggle(todo)} />
        <span className="title">{todo.title}</span>
      </label>
      <button className="delete" title="Delete" aria-label={`Delete ${todo.title}`} onClick={() => onDelete(todo)}>
        ×
      </button>
    </li>
  )
}

/** Oldest first, then by id, so both lists keep a stable order. */
export function byCreation(a, b) {
  return String(a.created_at ?? '').localeCompare(String(b.created_at ?? '')) || a.id.localeCompare(b.id)
}
