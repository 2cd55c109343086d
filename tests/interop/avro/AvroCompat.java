// Apache Avro's own reader/writer compatibility check, as a test peer of
// brokerlite's schema registry (tests/brokerlite/test_schema_registry_avro_peer.py).
// Reads lines "READER<TAB>WRITER" (compact JSON schemas) on stdin and prints, per
// line, Avro's verdict: COMPATIBLE or INCOMPATIBLE.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import org.apache.avro.Schema;
import org.apache.avro.SchemaCompatibility;

public class AvroCompat {
    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] pair = line.split("\t", 2);
            Schema reader = new Schema.Parser().parse(pair[0]);
            Schema writer = new Schema.Parser().parse(pair[1]);
            System.out.println(
                SchemaCompatibility.checkReaderWriterCompatibility(reader, writer).getType());
        }
    }
}
