#!/bin/sh
# The retriever of examples/session.toml: reads the query (one JSON object) on stdin and
# prints, as a JSON list, the lines of travel-notes.txt whose keyword appears in it. It
# answers only a fresh question (`last_role` is "user"), so a turn after tool results gets
# nothing new. Offline and dependency-free: keywords and notes must not contain quotes.
query=$(cat)
case "$query" in
  *'"last_role":"user"'*) ;;
  *) echo '[]'; exit 0 ;;
esac
out='['
sep=''
while IFS='|' read -r key text; do
  case "$query" in
    *"$key"*)
      out="$out$sep{\"text\": \"$text\", \"source\": \"travel-notes.txt\"}"
      sep=', '
      ;;
  esac
done < travel-notes.txt
echo "$out]"
