package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// Readings of /proc for the benchmarks that measure processes (local clusters, the operator).

// ProcKiB reads the "<field> N kB" line of /proc/<pid>/<file>, e.g. ("status", "VmRSS:") or
// ("smaps_rollup", "Pss:").
func ProcKiB(pid int, file, field string) (int64, error) {
	return fileKiB("/proc/"+strconv.Itoa(pid)+"/"+file, field)
}

// MemInfoKiB reads a field of /proc/meminfo in KiB (e.g. "MemAvailable:"): the host's memory.
func MemInfoKiB(field string) (int64, error) { return fileKiB("/proc/meminfo", field) }

// fileKiB reads the "<field> <n> kB" line of the proc file path.
func fileKiB(path, field string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), field)
		if !ok {
			continue
		}
		fields := strings.Fields(rest) // "123456 kB"
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("%s: unexpected %s line %q", path, field, sc.Text())
		}
		return strconv.ParseInt(fields[0], 10, 64)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("no %s in %s", field, path)
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's CPU times (100 on Linux).
const clockTicks = 100

// ProcStat returns the fields of /proc/<pid>/stat from the third (state) on: the command name
// before them may hold spaces. Field N of proc(5) is element N-3.
func ProcStat(pid int) ([]string, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:])), nil
}

// CPUSeconds reads the user and system CPU time of pid (fields 14 and 15) from /proc/<pid>/stat.
func CPUSeconds(pid int) (float64, error) {
	f, err := ProcStat(pid)
	if err != nil {
		return 0, err
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	s, err2 := strconv.ParseFloat(f[12], 64)
	return (u + s) / clockTicks, errors.Join(err1, err2)
}

// Quantile is the q-quantile of sorted values, interpolated linearly between the closest ranks
// (numpy's default), so that p95 of ten samples is not simply the maximum.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	lo, hi := int(math.Floor(pos)), int(math.Ceil(pos))
	return sorted[lo] + (sorted[hi]-sorted[lo])*(pos-float64(lo))
}
