// The write path: every change is a request to server.js, which writes it to Postgres. Nothing
// here touches local state; the change comes back through Syncline's shape log.
import { API_URL } from './config.js'

async function call(method, path, body) {
  const res = await fetch(`${API_URL}${path}`, {
    method,
    headers: body ? { 'content-type': 'application/json' } : undefined,
    body: body ? JSON.stringify(body) : undefined,
  })
  const answer = await res.json().catch(() => ({}))
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${answer.error ?? res.statusText}`)
  return answer // {todo, txid}
}

export const addTodo = (title) => call('POST', '/todos', { title })
export const setDone = (id, done) => call('PATCH', `/todos/${id}`, { done })
export const deleteTodo = (id) => call('DELETE', `/todos/${id}`)
