package main

import (
	"io"
	"os"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
)

// progressFactory makes progress bars on stderr, or silent ones.
type progressFactory struct {
	w  io.Writer
	on bool
}

func newProgressFactory(mode string, w io.Writer) *progressFactory {
	on := mode == "on"
	if mode == "auto" {
		if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
			on = true
		}
	}
	return &progressFactory{w: w, on: on}
}

// progress is one bar; a nil bar does nothing.
type progress struct{ bar *progressbar.ProgressBar }

// bar counts to total (use seconds for timed runs).
func (f *progressFactory) bar(total int64, what string) *progress {
	if !f.on {
		return &progress{}
	}
	return &progress{bar: progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(f.w),
		progressbar.OptionSetDescription(what),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionOnCompletion(func() { _, _ = io.WriteString(f.w, "\n") }),
		progressbar.OptionClearOnFinish(),
	)}
}

func (p *progress) add(n int) {
	if p.bar != nil {
		_ = p.bar.Add(n)
	}
}

func (p *progress) set(n int) {
	if p.bar != nil {
		_ = p.bar.Set(n)
	}
}

func (p *progress) finish() {
	if p.bar != nil {
		_ = p.bar.Finish()
	}
}

// clock advances a bar once a second until stop is closed (timed runs).
func (p *progress) clock(start time.Time, stop <-chan struct{}) {
	if p.bar == nil {
		return
	}
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				p.set(int(now.Sub(start) / time.Second))
			}
		}
	}()
}
