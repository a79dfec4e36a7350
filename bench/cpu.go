package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Every component started in this process runs under a pprof label
// naming it; goroutines inherit their creator's labels, so a CPU profile
// taken while the system serves splits its CPU by component. CPU with no
// label is the benchmark's own: its clients and the plain server.
const componentLabel = "component"

// components are the labels, in the order the table prints them.
var components = []string{"etcd", "coordinator", "worker", "gateway"}

// labelled runs f with goroutines it starts labelled as component.
func labelled(component string, f func() error) error {
	var err error
	pprof.Do(context.Background(), pprof.Labels(componentLabel, component), func(context.Context) { err = f() })
	return err
}

// cpuProfile is a CPU profile being taken of this process.
type cpuProfile struct {
	buf   bytes.Buffer
	start time.Time
}

// errProfiling says another CPU profile (--cpuprofile) holds the profiler.
var errProfiling = errors.New("the CPU profiler is in use (--cpuprofile)")

func startCPUProfile() (*cpuProfile, error) {
	p := &cpuProfile{start: time.Now()}
	if err := pprof.StartCPUProfile(&p.buf); err != nil {
		return nil, fmt.Errorf("%w: %v", errProfiling, err)
	}
	return p, nil
}

// stop ends the profile and returns the CPU time spent under each
// component label ("" for none).
func (p *cpuProfile) stop() (map[string]time.Duration, error) {
	pprof.StopCPUProfile()
	return cpuByLabel(&p.buf, componentLabel)
}

// cpuByLabel sums a CPU profile's cpu/nanoseconds samples by the value
// of one label. It reads the profile.proto format pprof writes (gzipped),
// only the fields it needs: Profile.sample (2), Profile.sample_type (1),
// Profile.string_table (6); Sample.value (2), Sample.label (3);
// Label.key (1), Label.str (2); ValueType.type (1), ValueType.unit (2).
func cpuByLabel(r io.Reader, label string) (map[string]time.Duration, error) {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	var strs []string
	var types [][2]int64 // type, unit string indices
	type sample struct {
		values []int64
		labels [][2]int64 // key, str string indices
	}
	var samples []sample
	err = fields(b, func(num protowire.Number, v []byte, n uint64) error {
		switch num {
		case 1:
			var t [2]int64
			err := fields(v, func(num protowire.Number, _ []byte, n uint64) error {
				if num == 1 || num == 2 {
					t[num-1] = int64(n)
				}
				return nil
			})
			types = append(types, t)
			return err
		case 2:
			var s sample
			err := fields(v, func(num protowire.Number, v []byte, n uint64) error {
				switch num {
				case 2:
					if v == nil { // unpacked
						s.values = append(s.values, int64(n))
						return nil
					}
					return packed(v, func(n uint64) { s.values = append(s.values, int64(n)) })
				case 3:
					var l [2]int64
					err := fields(v, func(num protowire.Number, _ []byte, n uint64) error {
						if num == 1 || num == 2 {
							l[num-1] = int64(n)
						}
						return nil
					})
					s.labels = append(s.labels, l)
					return err
				}
				return nil
			})
			samples = append(samples, s)
			return err
		case 6:
			strs = append(strs, string(v))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("CPU profile: %w", err)
	}
	str := func(i int64) string {
		if i < 0 || int(i) >= len(strs) {
			return ""
		}
		return strs[i]
	}
	col := -1
	for i, t := range types {
		if str(t[0]) == "cpu" && str(t[1]) == "nanoseconds" {
			col = i
		}
	}
	if col < 0 {
		return nil, errors.New("CPU profile without a cpu/nanoseconds sample type")
	}
	out := map[string]time.Duration{}
	for _, s := range samples {
		if col >= len(s.values) {
			continue
		}
		var v string
		for _, l := range s.labels {
			if str(l[0]) == label {
				v = str(l[1])
			}
		}
		out[v] += time.Duration(s.values[col])
	}
	return out, nil
}

// fields calls f with each field of message b: the bytes of a
// length-delimited field (nil for others), or the varint.
func fields(b []byte, f func(num protowire.Number, v []byte, n uint64) error) error {
	for len(b) > 0 {
		num, typ, k := protowire.ConsumeTag(b)
		if k < 0 {
			return protowire.ParseError(k)
		}
		b = b[k:]
		var err error
		switch typ {
		case protowire.VarintType:
			n, k := protowire.ConsumeVarint(b)
			if k < 0 {
				return protowire.ParseError(k)
			}
			b, err = b[k:], f(num, nil, n)
		case protowire.BytesType:
			v, k := protowire.ConsumeBytes(b)
			if k < 0 {
				return protowire.ParseError(k)
			}
			b, err = b[k:], f(num, v, 0)
		default:
			k := protowire.ConsumeFieldValue(num, typ, b)
			if k < 0 {
				return protowire.ParseError(k)
			}
			b = b[k:]
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func packed(b []byte, f func(uint64)) error {
	for len(b) > 0 {
		n, k := protowire.ConsumeVarint(b)
		if k < 0 {
			return protowire.ParseError(k)
		}
		f(n)
		b = b[k:]
	}
	return nil
}

// processCPU is the user plus system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTick is Linux's USER_HZ, the unit of /proc/PID/stat's times: 100
// on every architecture Linux runs Go on.
const clockTick = 10 * time.Millisecond

// procCPU is the user plus system CPU time of process pid, from /proc.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is parenthesised and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3, the state
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, s := range f[11:13] { // utime and stime: fields 14 and 15
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * clockTick, nil
}

// treeCPU is procCPU of pid and of every live descendant.
func treeCPU(pid int) (time.Duration, error) {
	total, err := procCPU(pid)
	if err != nil {
		return 0, err
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		kids, _ := os.ReadFile(t)
		for _, k := range strings.Fields(string(kids)) {
			if kid, err := strconv.Atoi(k); err == nil {
				if c, err := treeCPU(kid); err == nil {
					total += c
				}
			}
		}
	}
	return total, nil
}

// measureCPU loads the gateway alone under the CPU profiler and divides
// each component's CPU, and this process's, by the calls made.
func measureCPU(ctx context.Context, c config, r *result, gw *echoLoad, progress progressFunc) error {
	d := max(c.window/2, time.Second)
	progress("CPU per call: %d clients calling echo via the gateway for %v under the CPU profiler", c.clients, d)
	p, err := startCPUProfile()
	if err != nil {
		r.Skipped = append(r.Skipped, "CPU per call by component: "+err.Error())
		return nil
	}
	calls, cpu := gw.calls, processCPU()
	err = gw.run(ctx, d)
	cpu = processCPU() - cpu
	byLabel, perr := p.stop()
	if err = errors.Join(err, perr); err != nil {
		return fmt.Errorf("CPU per call: %w", err)
	}
	n := gw.calls - calls
	if n == 0 {
		return errors.New("CPU per call: no calls made")
	}
	r.CPUCalls, r.CPUPerCall = int(n), map[string]float64{}
	var ours time.Duration
	for _, comp := range components {
		r.CPUPerCall[comp] = ms(byLabel[comp] / time.Duration(n))
		ours += byLabel[comp]
	}
	r.CPUPerCall["clients"] = ms(byLabel[""] / time.Duration(n))
	r.CPUPerCallMcpcancel, r.ProcessCPUPerCall = ms(ours/time.Duration(n)), ms(cpu/time.Duration(n))
	return nil
}
