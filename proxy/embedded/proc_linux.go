package embedded

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
)

// startTied starts cmd so that the kernel sends it deathSig when this process
// dies, however it dies, and returns a channel that receives cmd.Wait's
// result once.
//
// Pdeathsig fires when the thread that forked the child exits, not the
// process. Go parks and exits threads as it likes, so the fork happens on a
// goroutine locked to its thread, and that goroutine stays (blocked in
// wait4) until the child has exited. Only then is the thread unlocked.
func startTied(cmd *exec.Cmd, deathSig syscall.Signal) (<-chan error, error) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = deathSig
	started := make(chan error, 1)
	exited := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		exited <- cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return exited, nil
}

// canJudgePids says isPostgresFor can tell our postmaster from a process
// that got its recycled pid.
const canJudgePids = true

// isPostgresFor reports whether pid is a live (not zombie) postgres process
// whose working directory is pgdata. A postmaster chdirs into its data
// directory, so this tells our postmaster from an unrelated process that got
// a recycled pid.
func isPostgresFor(pid int, pgdata string) bool {
	if pid <= 0 {
		return false
	}
	proc := filepath.Join("/proc", strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(proc, "stat"))
	if err != nil {
		return false
	}
	// stat is "pid (comm) state ..."; comm may itself contain ") ".
	open, end := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || end < open || end+2 >= len(stat) {
		return false
	}
	comm, state := string(stat[open+1:end]), stat[end+2]
	if state == 'Z' || state == 'X' || (comm != "postgres" && comm != "postmaster") {
		return false
	}
	want, err := filepath.EvalSymlinks(pgdata)
	if err != nil {
		return false
	}
	if cwd, err := os.Readlink(filepath.Join(proc, "cwd")); err == nil {
		return cwd == want
	}
	// No permission to read another user's cwd: fall back to the command
	// line, which names the data directory after -D.
	cmdline, err := os.ReadFile(filepath.Join(proc, "cmdline"))
	if err != nil {
		return false
	}
	for _, arg := range bytes.Split(cmdline, []byte{0}) {
		if string(arg) == pgdata || string(arg) == want {
			return true
		}
	}
	return false
}

// processGone reports whether pid no longer runs (absent or a zombie).
func processGone(pid int) bool {
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return true
	}
	end := bytes.LastIndexByte(stat, ')')
	return end < 0 || end+2 >= len(stat) || stat[end+2] == 'Z' || stat[end+2] == 'X'
}

// postgresIn lists the postgres processes working in pgdata.
func postgresIn(pgdata string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err == nil && pid != os.Getpid() && isPostgresFor(pid, pgdata) {
			pids = append(pids, pid)
		}
	}
	return pids
}
