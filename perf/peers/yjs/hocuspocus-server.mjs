// @hocuspocus/server with its defaults (in memory, no extensions), for perf/studies/yjs.py.
import { Server } from '@hocuspocus/server';

const server = new Server({ port: Number(process.env.PORT), address: '127.0.0.1', quiet: true });
await server.listen();
