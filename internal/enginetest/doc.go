// Package enginetest holds the engine's black-box tests, which run core.Worker
// on the in-memory adapter. They live outside core so that core, even in its
// tests, depends on ports only.
package enginetest
