// The UTF-8 helpers live in the base layer (error messages escape with them too).
#ifndef DS_TOKENIZER_UTF8_H
#define DS_TOKENIZER_UTF8_H

#include "base/utf8.h"

#endif
