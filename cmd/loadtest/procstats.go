package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux
// for every architecture Go supports).
const clockTicks = 100

// procSample is a process's resources at one moment: from /proc when a pid
// is given, else from the gateway's Prometheus metrics.
type procSample struct {
	At  time.Time
	RSS int64 // bytes
	// RSSAnon and RSSFile split RSS (/proc only; -1 unknown): the
	// process's own memory, and the pages of its binary and other files.
	RSSAnon, RSSFile int64
	CPUSeconds       float64 // user + system
	Goroutines       int64   // metrics only (-1 unknown)
	HeapInuse        int64   // metrics only (-1 unknown)
	Sessions         int64   // /readyz only (-1 unknown)
	Source           string
}

// gatewayProbe reads the gateway's resources.
type gatewayProbe struct {
	pid   int
	admin string
	http  *http.Client
}

func newGatewayProbe(pid int, admin string) *gatewayProbe {
	return &gatewayProbe{pid: pid, admin: strings.TrimRight(admin, "/"), http: &http.Client{Timeout: 10 * time.Second}}
}

// sample reads what it can; an error only when no source answered.
func (g *gatewayProbe) sample(ctx context.Context) (procSample, error) {
	p := procSample{At: time.Now(), RSS: -1, RSSAnon: -1, RSSFile: -1, CPUSeconds: -1, Goroutines: -1, HeapInuse: -1, Sessions: -1}
	var errs []string
	if g.admin != "" {
		m, err := g.metrics(ctx)
		if err != nil {
			errs = append(errs, err.Error())
		} else {
			p.Source = "metrics"
			p.RSS = int64(m["process_resident_memory_bytes"])
			p.CPUSeconds = m["process_cpu_seconds_total"]
			p.Goroutines = int64(m["go_goroutines"])
			if v, ok := m["go_memstats_heap_inuse_bytes"]; ok {
				p.HeapInuse = int64(v)
			}
		}
		if n, err := g.readySessions(ctx); err == nil {
			p.Sessions = n
		}
	}
	if g.pid > 0 {
		st, err := procStat(g.pid)
		if err != nil {
			errs = append(errs, err.Error())
		} else {
			p.RSS, p.RSSAnon, p.RSSFile, p.CPUSeconds, p.Source = st.rss, st.anon, st.file, st.cpu, "proc"
		}
	}
	if p.Source == "" {
		return p, fmt.Errorf("gateway resources unknown: %s (give --pid or --admin-url)", strings.Join(errs, "; "))
	}
	return p, nil
}

// metrics reads the unlabelled samples of the Prometheus text format.
func (g *gatewayProbe) metrics(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.admin+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := g.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out[f[0]] = v
		}
	}
	return out, sc.Err()
}

// readySessions is the open session count of /readyz.
func (g *gatewayProbe) readySessions(ctx context.Context) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.admin+"/readyz", nil)
	if err != nil {
		return 0, err
	}
	resp, err := g.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Sessions *int64 `json:"sessions"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Sessions == nil {
		return 0, fmt.Errorf("readyz: no session count")
	}
	return *body.Sessions, nil
}

// procStats are one read of /proc/<pid>: RSS and its anonymous and
// file-backed parts (bytes, -1 unknown) and utime+stime (seconds).
type procStats struct {
	rss, anon, file int64
	cpu             float64
}

// procStat reads VmRSS, RssAnon and RssFile from /proc/<pid>/status and
// utime+stime from /proc/<pid>/stat.
func procStat(pid int) (procStats, error) {
	st := procStats{rss: -1, anon: -1, file: -1}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return st, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		for key, into := range map[string]*int64{"VmRSS:": &st.rss, "RssAnon:": &st.anon, "RssFile:": &st.file} {
			if v, ok := strings.CutPrefix(line, key); ok {
				if f := strings.Fields(v); len(f) >= 1 {
					kb, _ := strconv.ParseInt(f[0], 10, 64)
					*into = kb * 1024
				}
			}
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return st, err
	}
	// The command name (field 2) may hold spaces: count fields after its ')'.
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return st, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	st.cpu = (utime + stime) / clockTicks
	return st, nil
}

// selfCPU is this process's user + system CPU seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}
