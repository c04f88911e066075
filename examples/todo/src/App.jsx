import { useState } from 'react'

import AllTodos from './AllTodos.jsx'
import { addTodo } from './api.js'
import { API_URL, SYNCLINE_URL } from './config.js'
import OpenTodos from './OpenTodos.jsx'

export default function App() {
  return (
    <main>
      <header>
        <h1>Syncline todos</h1>
        <p className="muted">
          Shapes from <code>{SYNCLINE_URL}</code>, writes through <code>{API_URL}</code>
        </p>
        <AddTodo />
      </header>
      <div className="views">
        <AllTodos />
        <OpenTodos />
      </div>
    </main>
  )
}

function AddTodo() {
  const [title, setTitle] = useState('')
  const [error, setError] = useState(null)
  const [busy, setBusy] = useState(false)

  async function submit(event) {
    event.preventDefault()
    if (!title.trim()) return
    setBusy(true)
    try {
      await addTodo(title.trim())
      setTitle('')
      setError(null)
    } catch (e) {
      setError(e.message)
    } finally {
      setBusy(false)
    }
  }

  return (
    <form className="add" onSubmit={submit}>
      <input
        data-testid="new-title"
        value={title}
        onChange={(e) => setTitle(e.target.value)}
        placeholder="What needs doing?"
        aria-label="New todo"
      />
      <button data-testid="add" type="submit" disabled={busy}>
        Add
      </button>
      {error && <p className="error">{error}</p>}
    </form>
  )
}
