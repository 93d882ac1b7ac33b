// UTF-8 helpers shared by the encoder (strict validation), the streaming decoder (U+FFFD
// replacement of maximal subparts, Unicode 15 section 3.9, "U+FFFD Substitution of Maximal
// Subparts") and error messages (ds_text_escape: bytes from files made printable, one line).
#ifndef DS_BASE_UTF8_H
#define DS_BASE_UTF8_H

#include <stddef.h>
#include <stdint.h>

// Length of the character that starts with `lead` (1..4), or 0 for a byte that cannot start one
// (continuation bytes 80..BF, C0, C1, F5..FF).
int ds_utf8_seq_len(uint8_t lead);
// The range the byte at position `pos` (1..3) of a character starting with `lead` must lie in.
// Excludes overlongs (E0 80..9F, F0 80..8F), surrogates (ED A0..BF) and code points above
// U+10FFFF (F4 90..BF).
void ds_utf8_cont_range(uint8_t lead, int pos, uint8_t *lo, uint8_t *hi);
// Returns 1 when s[0..n) is valid UTF-8; otherwise 0 and the offset of the first byte of the
// first invalid (or truncated) sequence in *bad_off.
int ds_utf8_valid(const uint8_t *s, size_t n, size_t *bad_off);
// Bytes (from a file, a path, ...) as printable one-line valid UTF-8 in dst (cap bytes, NUL-ended,
// cut at a whole character or escape): valid characters as they are, \n \r \t as those two-char
// escapes, other control bytes and bytes of invalid UTF-8 as \xNN. Returns the length written.
// Text that needs no escape is unchanged, so escaping twice changes nothing.
size_t ds_text_escape(char *dst, size_t cap, const char *src, size_t n);

#endif
