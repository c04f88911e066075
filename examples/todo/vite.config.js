import react from '@vitejs/plugin-react'
import { defineConfig } from 'vite'

// VITE_SYNCLINE_URL and VITE_API_URL (see src/config.js) are read from the environment or a
// .env.local file at build time; `base: './'` lets dist/ be served from any path.
export default defineConfig({
  base: './',
  plugins: [react()],
  server: { port: 5173 },
  // React, the Electric client and TanStack DB in one chunk: about 600 kB, 180 kB gzipped.
  build: { chunkSizeWarningLimit: 1000 },
})
