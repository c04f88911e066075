// Where the app finds Syncline and the write API. Vite reads VITE_* variables from the
// environment (or .env.local) when it builds or serves the app.
const trim = (url) => url.replace(/\/+$/, '')

/** Syncline's base URL; the shape endpoint is `${SYNCLINE_URL}/v1/shape`. */
export const SYNCLINE_URL = trim(import.meta.env.VITE_SYNCLINE_URL || 'http://localhost:3000')

/** The example's API server (server.js), which writes to Postgres. */
export const API_URL = trim(import.meta.env.VITE_API_URL || 'http://localhost:3001')

export const SHAPE_URL = `${SYNCLINE_URL}/v1/shape`
