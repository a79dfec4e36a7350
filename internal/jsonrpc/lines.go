package jsonrpc

import (
	"bufio"
	"errors"
	"io"
)

// ErrLineTooLong says a line was longer than ReadLine's bound; the rest of
// it was read and dropped, so the next ReadLine starts at the next line.
var ErrLineTooLong = errors.New("jsonrpc: line too long")

// ReadLine reads one line of a stdio stream, where each message is a line:
// into a slice of its own, with its end, at most max bytes. The last line
// may lack its end; io.EOF comes after it.
func ReadLine(br *bufio.Reader, max int64) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if int64(len(buf)+len(chunk)) > max {
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				return nil, err
			}
			return nil, ErrLineTooLong
		}
		buf = append(buf, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if len(buf) > 0 && errors.Is(err, io.EOF) {
				return buf, nil
			}
			return nil, err
		}
		return buf, nil
	}
}
