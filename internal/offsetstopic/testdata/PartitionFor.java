import java.nio.charset.StandardCharsets;
import java.util.HexFormat;

// Prints, for each hex-encoded group id given as an argument, the id's
// String.hashCode() after decoding the bytes as UTF-8 (as Kafka's protocol
// reader does) and Kafka's partitionFor for 50 and 7 partitions:
// Utils.abs(hash) % n, where Utils.abs(n) is n & 0x7fffffff.
public class PartitionFor {
    public static void main(String[] args) {
        for (String hex : args) {
            String s = new String(HexFormat.of().parseHex(hex), StandardCharsets.UTF_8);
            int h = s.hashCode();
            System.out.println(hex + " " + h + " " + ((h & 0x7fffffff) % 50) + " " + ((h & 0x7fffffff) % 7));
        }
    }
}
