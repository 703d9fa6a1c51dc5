package cli

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// PrivateMode is the mode of every file Cistern writes with captured data
// (capture --out, query --out): what other users' programs sent is for the
// operator alone.
const PrivateMode os.FileMode = 0o600

// CreatePrivate opens path for writing captured data, readable and
// writable by its owner alone:
//   - a new file is created 0600 (whatever the umask);
//   - an existing regular file of ours is truncated and set to 0600;
//   - a regular file, or a symbolic link, owned by another user is refused:
//     its owner could read what we write (through a descriptor opened
//     before, or by setting the mode back), or point us at a file of theirs
//     choosing;
//   - a device or a FIFO (/dev/null, /dev/stdout, a pipe) is written as it
//     is: the caller chose a stream, not a file.
func CreatePrivate(path string) (*os.File, error) {
	euid := uint32(os.Geteuid())
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != euid {
			return nil, fmt.Errorf("%s is a symbolic link of uid %d: refusing to follow it with captured data (give the target's path)", path, uid)
		}
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, PrivateMode)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		f.Close()
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if !fi.Mode().IsRegular() {
		return f, nil
	}
	if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != euid {
		return fail(fmt.Errorf("%s belongs to uid %d: refusing to write captured data into a file another user owns (remove it or choose another path)", path, uid))
	}
	if err := f.Chmod(PrivateMode); err != nil {
		return fail(fmt.Errorf("%s: set mode 0600: %w", path, err))
	}
	if err := f.Truncate(0); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fail(err)
	}
	return f, nil
}
