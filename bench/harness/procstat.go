package harness

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, 100 on Linux.
const clockTicks = 100

// CPUTime is the user+system CPU a process has used (0 if it is gone).
func CPUTime(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	// Fields after the command name, which is in parentheses and may hold spaces.
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTicks
}

// WriteCalls is the write system calls a process has made (syscw of
// /proc/PID/io; 0 if it is gone). A Kafka client writes each request in
// one call, so their rate is about its requests per second.
func WriteCalls(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "syscw:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// PeakRSS is a process's peak resident set (VmHWM), in bytes.
func PeakRSS(pid int) int64 { return statusKB(pid, "VmHWM:") * 1024 }

// RSS is a process's current resident set, in bytes.
func RSS(pid int) int64 { return statusKB(pid, "VmRSS:") * 1024 }

func statusKB(pid int, field string) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), field) {
			fs := strings.Fields(sc.Text())
			if len(fs) >= 2 {
				n, _ := strconv.ParseInt(fs[1], 10, 64)
				return n
			}
		}
	}
	return 0
}

// DirSize is the bytes of the regular files under dir whose names end in
// suffix ("" for all).
func DirSize(dir, suffix string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() && strings.HasSuffix(path, suffix) {
			n += info.Size()
		}
		return nil
	})
	return n
}

// LiveHeap reads HeapAlloc from a Go process's heap profile in text form
// (net/http/pprof's /debug/pprof/heap?gc=1&debug=1: the runtime collects
// garbage before it writes the statistics), so it is the live heap.
func LiveHeap(ctx context.Context, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, fmt.Errorf("heap profile: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("heap profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("heap profile: %s", resp.Status)
	}
	return parseHeapAlloc(resp.Body)
}

func parseHeapAlloc(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "# HeapAlloc = "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("heap profile: HeapAlloc %q: %w", v, err)
			}
			return n, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("heap profile: %w", err)
	}
	return 0, errors.New("heap profile: no HeapAlloc line")
}
