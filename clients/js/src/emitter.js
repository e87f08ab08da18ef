// A tiny event emitter (browsers and Node alike, no dependency).

export class Emitter {
  constructor() {
    this._handlers = new Map();
  }

  /** Listen; returns a function that stops listening. */
  on(event, handler) {
    let set = this._handlers.get(event);
    if (!set) this._handlers.set(event, (set = new Set()));
    set.add(handler);
    return () => set.delete(handler);
  }

  emit(event, ...args) {
    const set = this._handlers.get(event);
    if (!set) return;
    for (const handler of [...set]) {
      try {
        handler(...args);
      } catch (err) {
        // A failing listener must not break the stream for the others.
        queueMicrotask(() => {
          throw err;
        });
      }
    }
  }
}
