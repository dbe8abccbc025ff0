package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Which relay process sent a request: the receiver cannot tell from the request (a relay
// sends no process id), so on each new connection it looks up, in /proc (Linux), which of the
// fleet's processes owns the connection's client end. A connection lives for many requests,
// so this costs one look-up per connection, not per request. 0 when it cannot tell (another
// system, the process gone, the socket closed already).

// connOwner returns the fleet's id of the process among pids (OS pid → relay id) that owns the
// client end of c, a connection accepted by the receiver; 0 if none is found.
func connOwner(c net.Conn, pids map[int]int) int {
	client, ok1 := c.RemoteAddr().(*net.TCPAddr)
	server, ok2 := c.LocalAddr().(*net.TCPAddr)
	if !ok1 || !ok2 || len(pids) == 0 {
		return 0
	}
	inode := socketInode(client.Port, server.Port)
	if inode == "" {
		return 0
	}
	want := "socket:[" + inode + "]"
	for pid, id := range pids {
		fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
		for _, fd := range fds {
			if l, err := os.Readlink(fd); err == nil && l == want {
				return id
			}
		}
	}
	return 0
}

// socketInode finds, in /proc/net/tcp and tcp6, the inode of the socket whose local port is
// local and remote port is remote; "" if none.
func socketInode(local, remote int) string {
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		if inode := scanTCPTable(table, local, remote); inode != "" {
			return inode
		}
	}
	return ""
}

func scanTCPTable(path string, local, remote int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 || hexPort(fields[1]) != local || hexPort(fields[2]) != remote {
			continue
		}
		return fields[9]
	}
	return ""
}

// hexPort is the port of an address as /proc/net/tcp writes it (ADDR:PORT, both hex).
func hexPort(addr string) int {
	_, p, ok := strings.Cut(addr, ":")
	if !ok {
		return -1
	}
	n, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return -1
	}
	return int(n)
}
