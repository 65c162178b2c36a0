package main

import (
	"syscall"
	"testing"
	"time"

	"github.com/jetway-gateway/jetway/internal/gatewaytest"
)

// proc is a gateway process: the multi-server tests run the real binary,
// as ECS runs tasks.
type proc struct {
	*gw
	p *gatewaytest.Process
}

// startProcess runs the gateway binary with the world's settings plus
// overrides; it is killed when the test ends.
func (w *world) startProcess(overrides map[string]string) *proc {
	w.t.Helper()
	return w.startBinary("", overrides)
}

// startBinary is startProcess with another gateway binary (a previous
// release; "" is this one).
func (w *world) startBinary(bin string, overrides map[string]string) *proc {
	w.t.Helper()
	p := gatewaytest.Start(w.t, gatewaytest.Options{Binary: bin, Env: w.merged(overrides), KillAtEnd: true})
	return &proc{gw: &gw{Addr: p.Addr, Admin: p.Admin, logs: p.Log}, p: p}
}

func (p *proc) signal(s syscall.Signal) { p.p.Signal(s) }

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t testing.TB, within time.Duration) int {
	t.Helper()
	return p.p.Wait(t, within)
}

// runCommand runs a gateway subcommand with the world's environment.
func (w *world) runCommand(overrides map[string]string, args ...string) string {
	w.t.Helper()
	return gatewaytest.Run(w.t, w.merged(overrides), args...)
}
