#!/usr/bin/env bash
# Writes the seed corpora of fuzz_tsv and fuzz_text into <dir>/tsv and <dir>/text (the committed
# copies live in fuzz/corpus/): small hand-written TSV files in the layouts the dataset reader
# knows (SST-2, MRPC, QQP), with the edge cases of the format (BOM, CR LF, blank lines, malformed
# rows, bad labels, a repeated column), gzip copies of some (one member, two members, damaged);
# texts with ASCII, UTF-8, invalid UTF-8, blanks and punctuation; vocabulary files, valid and
# not. gzip -n leaves out the file name and time, so the output depends only on gzip's version.
#
#   fuzz/make_text_seeds.sh fuzz/corpus
set -euo pipefail

dir="${1:?usage: fuzz/make_text_seeds.sh <corpus directory>}"
mkdir -p "${dir}/tsv" "${dir}/text"

put() { printf '%s' "$2" >"$1"; }

# --- fuzz_tsv ---------------------------------------------------------------------------------
t="${dir}/tsv"
put "${t}/sst2_bundled.tsv" $'label\tsentence\n1\ta gripping , funny film .\n0\tflat and dull\n'
put "${t}/sst2_glue.tsv" $'sentence\tlabel\nit \'s a charming journey \t1\nthe plot is thin \t0\n'
put "${t}/mrpc_bundled.tsv" $'label\tsentence1\tsentence2\n1\tHe said hello.\tHe greeted them.\n0\tA cat.\tA dog.\n'
put "${t}/qqp_glue.tsv" $'id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t1\t2\tHow do I learn C++?\tWhat is the best way to learn C++?\t1\n2\t3\t4\tWhy is the sky blue?\tWhat is a kernel?\t0\n'
put "${t}/qqp_bundled.tsv" $'label\tquestion1\tquestion2\n2\tq one\tq two\n0\ta\tb\n'
put "${t}/crlf_bom.tsv" $'\xEF\xBB\xBFlabel\tsentence\r\n1\tcaf\xC3\xA9 cr\xC3\xA8me\r\n\r\n0\t\xE2\x80\x9Cquoted\xE2\x80\x9D \xE2\x80\x94 dash\r\n'
put "${t}/blank_lines.tsv" $'\n\nlabel\tsentence\n\n1\tx\n\r\n\n'
put "${t}/malformed.tsv" $'label\tsentence\n1\tok\n0\ttoo\tmany\n1\n1\tlast line without end'
put "${t}/bad_labels.tsv" $'label\tsentence\n 1 \tspaces around\n-1\tnegative\n2\tout of range\nx\tnot a number\n'
put "${t}/unlabelled.tsv" $'index\tsentence\n0\tan unlabelled test sentence\n1\t\n'
put "${t}/repeated_column.tsv" $'label\tsentence\tsentence\n1\ta\tb\n'
put "${t}/empty_fields.tsv" $'label\tsentence1\tsentence2\n1\t\t \n0\t"quote\t\'\n'
gzip -n -c "${t}/sst2_bundled.tsv" >"${t}/sst2_bundled.tsv.gz"
gzip -n -c "${t}/qqp_glue.tsv" >"${t}/qqp_glue.tsv.gz"
{
  printf '%s' $'label\tsentence1\tsentence2\n' | gzip -n -c
  printf '%s' $'1\tfirst\tmember\n0\tsecond\tmember\n' | gzip -n -c
} >"${t}/two_members.tsv.gz"
{
  cat "${t}/sst2_bundled.tsv.gz"
  printf 'trailing bytes'
} >"${t}/trailing_data.tsv.gz"
head -c 30 "${t}/qqp_glue.tsv.gz" >"${t}/truncated.tsv.gz"

# --- fuzz_text --------------------------------------------------------------------------------
x="${dir}/text"
put "${x}/ascii.txt" $'It\'s a GREAT film, isn\'t it? (Yes!) 3.5/5 -- "wow" [SEP] [CLS]\n'
put "${x}/utf8.txt" $'CAF\xC3\x89 \xC3\x89T\xC3\x89 \xC3\x86r\xC3\xB8 na\xC3\xAFve \xE2\x80\x94 \xE2\x80\x9Cquotes\xE2\x80\x9D \xE2\x80\xA6 \xE2\x80\x98x\xE2\x80\x99 Stra\xC3\x9Fe \xC3\x97\xC3\xB7 \xE6\x97\xA5\xE6\x9C\xAC\n'
put "${x}/invalid_utf8.bin" $'\xC3\x28 \xA0\xA1 \xE2\x28\xA1 \xE2\x80 \xF0\x28\x8C\xBC \xC3\xC3\x85 \xFF\xFE \xE2\x81\n'
put "${x}/blanks.txt" $' \t\r\n\f\v  word\t\tword  \v'
put "${x}/specials.txt" $'[PAD] [UNK] [SEP] [CLS] [pad] [SEP][SEP]'
put "${x}/punctuation.txt" $'!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~ a\xE2\x80\x9Ab\xE2\x80\x9Ec\xE2\x80\xB9d\xE2\x81\x84e\xE2\x81\xAFf'
put "${x}/repeated.txt" $'the the the a a b b c d e f g h the a'
put "${x}/vocabulary.txt" $'coulomb-vocabulary 1\nlowercase 1\nsplit_punctuation 1\nsize 7\n[PAD]\t0\n[UNK]\t0\n[SEP]\t0\n[CLS]\t0\nthe\t3\nfilm\t2\n,\t1\n'
put "${x}/vocabulary_crlf.txt" $'coulomb-vocabulary 1\r\nlowercase 0\r\nsplit_punctuation 0\r\nsize 5\r\n[PAD]\t0\r\n[UNK]\t0\r\n[SEP]\t0\r\n[CLS]\t0\r\nIt\'s\t1\r\n\r\n'
put "${x}/vocabulary_version.txt" $'coulomb-vocabulary 2\nlowercase 1\nsplit_punctuation 1\nsize 4\n[PAD]\t0\n[UNK]\t0\n[SEP]\t0\n[CLS]\t0\n'
put "${x}/vocabulary_duplicate.txt" $'coulomb-vocabulary 1\nlowercase 1\nsplit_punctuation 1\nsize 6\n[PAD]\t0\n[UNK]\t0\n[SEP]\t0\n[CLS]\t0\nword\t1\nword\t1\n'
put "${x}/vocabulary_short.txt" $'coulomb-vocabulary 1\nlowercase 1\nsplit_punctuation 0\nsize 9\n[PAD]\t0\n[UNK]\t0\n[SEP]\t0\n[CLS]\t0\na\t-1\n'
