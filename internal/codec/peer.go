package codec

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
)

// errNoPeer is returned when no socket of this host is the peer of a connection.
var errNoPeer = errors.New("no local socket is the connection's peer")

// loopbackPeerUID is the user owning the other end of a TCP connection on this host: the socket
// whose local address is the connection's remote one, and whose remote address is its local one,
// as the kernel lists them in /proc/net/tcp and tcp6. It is how --dev-trust-origins tells the
// developer's own browser from another user's process, which can forge any header.
func loopbackPeerUID(local, remote netip.AddrPort) (uint32, error) {
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		uid, err := peerUIDIn(file, local, remote)
		if err == nil || !errors.Is(err, errNoPeer) {
			return uid, err
		}
	}
	return 0, errNoPeer
}

func peerUIDIn(file string, local, remote netip.AddrPort) (uint32, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 8 {
			continue
		}
		l, err1 := parseProcAddr(fields[1])
		r, err2 := parseProcAddr(fields[2])
		if err1 != nil || err2 != nil || !sameEndpoint(l, remote) || !sameEndpoint(r, local) {
			continue
		}
		uid, err := strconv.ParseUint(fields[7], 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%s: uid %q: %w", file, fields[7], err)
		}
		return uint32(uid), nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errNoPeer
}

func sameEndpoint(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().Unmap() == b.Addr().Unmap()
}

// parseProcAddr reads an address of /proc/net/tcp{,6}: the IP as 32-bit words in the host's
// byte order, in hex, a colon, and the port in hex.
func parseProcAddr(s string) (netip.AddrPort, error) {
	ipHex, portHex, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	raw, err := hex.DecodeString(ipHex)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("address %q", s)
	}
	port, err := strconv.ParseUint(portHex, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("port %q", s)
	}
	ip := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.BigEndian.PutUint32(ip[i:], binary.NativeEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(addr, uint16(port)), nil
}
