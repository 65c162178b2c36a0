// Jetway browser client (see web/README when complete).
export {};
